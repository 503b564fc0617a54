import { IsInt, IsString, Length, Matches, Max, Min } from 'class-validator';

/** `POST /charges` body. Unknown fields are rejected by the app's ValidationPipe. */
export class CreateChargeDto {
  @IsInt()
  @Min(1)
  @Max(99_999_999)
  amount!: number;

  @IsString()
  @Matches(/^[a-z]{3}$/, { message: 'currency must be 3 lower-case letters' })
  currency!: string;

  @IsString()
  @Length(1, 64)
  customer!: string;
}
