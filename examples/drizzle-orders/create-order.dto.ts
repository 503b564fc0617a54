import { IsInt, IsString, Length, Max, Min } from 'class-validator';

/** `POST /orders` body. Unknown fields are refused by the app's ValidationPipe (400). */
export class CreateOrderDto {
  @IsString()
  @Length(1, 64)
  sku!: string;

  @IsInt()
  @Min(1)
  @Max(1000)
  quantity!: number;
}
