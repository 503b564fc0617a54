import { IsIn, IsInt, IsString, Length, Min } from 'class-validator';

/** A PSP event, delivered at least once. */
export class PspEventDto {
  @IsString()
  @Length(1, 255)
  id!: string;

  @IsIn(['refund'])
  type!: 'refund';

  @IsString()
  @Length(1, 64)
  charge!: string;

  @IsInt()
  @Min(1)
  amount!: number;
}
